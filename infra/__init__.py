"""What every layer shares: config model, naming, instance catalogue, compliance packs, CLI."""
