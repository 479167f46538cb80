"""A conversion: options checked once, the source opened and planned from headers, the shard-filling pipeline, the
finisher, the result; what ``inspect`` reports and the manifest key a conversion would record."""
