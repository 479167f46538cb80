"""What a conversion records in its output: the report (`eaglequant_report.json`) and the manifest that keys it."""
