from vidtx.cli import main

main()
