"""Jobs: one request run end to end over the layers below, from the user's paths to the result. The conversion job
opens the source, plans, writes, verifies when asked (:mod:`eaglequant.verification`), writes the card
(:mod:`eaglequant.publish`) and commits; the upload job verifies before it sends; the acceptance job measures and
records into each DST and its card. The API, search and batch call them; each step is a lower package's."""
