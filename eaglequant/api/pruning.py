"""``prune()``: a draft head with a pruned vocabulary, written as a plain head every tool reads
(:mod:`eaglequant.vocabulary`)."""

from eaglequant.vocabulary.prune_job import prune

__all__ = ["prune"]
