from eaglequant.cli import main

main()
