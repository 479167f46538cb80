"""A written checkpoint read back as each engine reads it: its config, its head, and per runtime module the rule and
the tensors expected.
"""
