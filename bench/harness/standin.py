"""The bare forwarder: the least a Python gateway can do, as a reference row for the real one.

A Litestar handler that forwards the request body to the canned upstream with one shared
``aiohttp.ClientSession`` and passes the answer back (bytes, or the SSE stream chunk by chunk), on
uvicorn with uvloop and httptools. No auth, limits, routing or telemetry: the gap between this row
and the gateway's is what the gateway's features cost.

    python bench/harness/standin.py --upstream http://127.0.0.1:NGINX_PORT --port 8001
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator

import aiohttp
import msgspec
import uvicorn
from litestar import Litestar, Request, Response, get, post
from litestar.datastructures import State
from litestar.response import Stream


class _StreamFlag(msgspec.Struct):
    """Only the field the forwarder needs; the rest of the body is passed through untouched."""

    stream: bool = False


_decode_flag = msgspec.json.Decoder(_StreamFlag).decode


def create_app(upstream: str) -> Litestar:
    json_url = f"{upstream}/json/v1/chat/completions"
    sse_url = f"{upstream}/sse/v1/chat/completions"

    async def open_session(app: Litestar) -> None:
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=600)
        app.state.session = aiohttp.ClientSession(connector=connector)

    async def close_session(app: Litestar) -> None:
        await app.state.session.close()

    @get("/healthz", sync_to_thread=False)
    def healthz() -> str:
        return "ok"

    @post("/v1/chat/completions", status_code=200)
    async def chat(request: Request, state: State) -> Response[bytes] | Stream:
        body = await request.body()
        is_stream = _decode_flag(body).stream
        headers = {"Content-Type": "application/json"}
        resp = await state.session.post(sse_url if is_stream else json_url, data=body, headers=headers)
        if not is_stream:
            data = await resp.read()
            return Response(data, status_code=resp.status, media_type="application/json")

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in resp.content.iter_any():
                    yield chunk
            finally:
                resp.release()

        return Stream(chunks(), status_code=resp.status, media_type="text/event-stream")

    # logging_config=None: Litestar's default logging setup is a measurable cost on the hot path.
    return Litestar(
        route_handlers=[healthz, chat],
        on_startup=[open_session],
        on_shutdown=[close_session],
        logging_config=None,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--upstream", required=True, help="base URL of the canned nginx upstream")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    print(f"bare forwarder on http://{args.host}:{args.port} -> {args.upstream}", flush=True)
    uvicorn.run(
        create_app(args.upstream),
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        access_log=False,
        log_level="warning",
        lifespan="on",
    )


if __name__ == "__main__":
    main()
