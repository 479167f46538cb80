"""A pruned draft vocabulary: the tokens the target emits most often, counted, chosen and written."""
