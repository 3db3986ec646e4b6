from jobmanager.server import main

main()
