"""One module per deployable stack, in deploy order."""
