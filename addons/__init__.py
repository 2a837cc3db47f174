"""One module per EKS add-on, behind the contract in addons.base."""
