from gitsess.cli import main

main()
