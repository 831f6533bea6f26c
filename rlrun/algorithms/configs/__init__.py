"""Each algorithm's hyper-parameters: a pydantic `Config` per algorithm, named by its module.

Kept apart from the agents so that a spec validates (and `rlrun spec schema`, `rlrun gc` read one)
without importing torch or gymnasium: nothing here may import them.
"""
