"""A raw asyncio/uvloop HTTP/1.1 responder (no ASGI, no framework): answers every request with a tiny fixed
response. It measures the load generator itself -- how fast it can send -- and stands in for a failing server
(``--fail-every N``: every Nth request gets a 500).

    python -m loadtest.nullserver --port 8001 [--fail-every 10]
"""

from __future__ import annotations

import argparse
import asyncio

_OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
_FAIL = b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\ncontent-length: 4\r\n\r\nfail"


class _Responder(asyncio.Protocol):
    def __init__(self, state: dict) -> None:
        self.state = state
        self.buf = bytearray()
        self.need = -1
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        while True:
            if self.need < 0:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = bytes(buf[:end]).lower()
                p = head.find(b"\r\ncontent-length:")
                length = 0
                if p >= 0:
                    e = head.find(b"\r\n", p + 2)
                    length = int(head[p + 17 : e if e >= 0 else len(head)])
                del buf[: end + 4]
                self.need = length
            if len(buf) < self.need:
                return
            del buf[: self.need]
            self.need = -1
            self.state["n"] += 1
            every = self.state["fail_every"]
            self.transport.write(_FAIL if every and self.state["n"] % every == 0 else _OK)


async def serve(host: str, port: int, fail_every: int = 0) -> None:
    state = {"n": 0, "fail_every": fail_every}
    server = await asyncio.get_running_loop().create_server(lambda: _Responder(state), host, port, backlog=1024)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--fail-every", type=int, default=0, help="answer every Nth request with a 500 (0: never)")
    args = ap.parse_args(argv)
    try:
        import uvloop

        uvloop.run(serve(args.host, args.port, args.fail_every))
    except ImportError:  # pragma: no cover
        asyncio.run(serve(args.host, args.port, args.fail_every))


if __name__ == "__main__":
    main()
