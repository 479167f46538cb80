"""A conversion: options checked once, the plan from headers, the shard-filling pipeline, the finisher, the result."""
