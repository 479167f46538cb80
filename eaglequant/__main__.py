from eaglequant.cli import entry

entry()
