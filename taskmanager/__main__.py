from taskmanager.server import main

main()
