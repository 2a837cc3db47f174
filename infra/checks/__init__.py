"""The config's rules that span fields, one module per area as in infra/config: each takes
the whole `Settings` and the problem collector, reads the models, and says each problem in one
line. One layer above the models (which call none of them), beside infra/admission.py,
infra/prerequisites.py and infra/field_paths.py; validation (infra/validation.py) runs them.
"""
