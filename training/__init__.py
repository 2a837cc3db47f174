"""The sample job as the training image runs it: train.py and its neighbours, which import one
another flat (`from model_shape import ...`) from the folder the image copies them into,
without this file. As a package it lets the config and the job manifest read model_shape and
log_format, so the job and what renders it share one source."""
