"""One module per deployable stack (network, cluster, hyperpod, operations, addons, sample_job,
in deploy order), and the parts the cluster stack is built from in modules of their own: the
lifecycle scripts (lifecycle), shared storage (storage), the chart's image copies for a closed
network (image_mirror)."""
