"""One module per EKS add-on, behind the contract in addons.base; addons.registry orders the
enabled ones."""
