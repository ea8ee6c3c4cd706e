"""``python -m service``: the bidding service (service/cli.py; ``python -m service --help`` lists the options)."""

from service.cli import main

if __name__ == "__main__":  # uvicorn's worker processes import this module again (spawn): they must not serve
    main()
