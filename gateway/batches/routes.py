"""OpenAI's Files and Batch APIs (Litestar routes), for the caller's own tenant::

    POST   /v1/files                      multipart ``file`` and ``purpose`` (``batch``): a batch input
                                          file, checked line by line
    GET    /v1/files                      the tenant's files (``purpose``, ``limit``, ``after``)
    GET    /v1/files/{id}                 one file object
    GET    /v1/files/{id}/content         its bytes (JSON lines)
    DELETE /v1/files/{id}                 ``{"id", "object": "file", "deleted": true}``
    POST   /v1/batches                    ``input_file_id``, ``endpoint``, ``completion_window``
                                          (``24h``), ``metadata``: a batch, run as the caller's key
    GET    /v1/batches                    the tenant's batches, newest first (``limit``, ``after``)
    GET    /v1/batches/{id}               one batch object
    POST   /v1/batches/{id}/cancel        stop it: ``cancelling``, then ``cancelled``

Each needs a key as the proxied API does (a failure counted against the client); another tenant's
file or batch is a 404. Errors are OpenAI-shaped; a store that cannot answer is a 503.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
from litestar import MediaType, Request, Response, get, post, route
from litestar.datastructures import UploadFile
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.handlers import HTTPRouteHandler

from gateway.authentication import authenticate_client
from gateway.batches.records import page
from gateway.batches.service import BatchService
from gateway.errors import (
    BodyTooLarge,
    GatewayError,
    InvalidJSON,
    InvalidRequest,
    ServiceUnavailable,
    render,
)
from gateway.policy import ApiKey
from gateway.redis_client.resp import RespError

if TYPE_CHECKING:
    from gateway.instance import Gateway

__all__ = ["batch_routes"]

_encode = msgspec.json.encode
MULTIPART_OVERHEAD_BYTES = 64 * 1024
"""Room for the multipart framing and the ``purpose`` field around the file's bytes."""


def _render(error: GatewayError) -> Response[bytes]:
    status, body, headers = render(error)
    return Response(content=body, status_code=status, media_type=MediaType.JSON, headers=headers)


def _json(document: Any) -> Response[bytes]:
    return Response(content=_encode(document), media_type=MediaType.JSON)


def batch_routes(
    gateway: Gateway, service: BatchService, wake: Callable[[], None] = lambda: None
) -> list[HTTPRouteHandler]:
    """The routes, bound to ``gateway`` (its policy, keys and client limits) and ``service``; ``wake``
    (this process's runner) is called when a batch is made or cancelled, so it starts or ends without
    waiting for the runner's next poll. The upload bound is the policy's ``batches.max_file_bytes`` when
    the routes are built (a change needs a restart); a smaller one in a reloaded policy is checked on
    each upload."""
    max_file_bytes = gateway.policy.batches.max_file_bytes
    max_upload_bytes = max_file_bytes + MULTIPART_OVERHEAD_BYTES

    async def caller(request: Request[Any, Any, Any]) -> tuple[str, ApiKey | None]:
        compiled = gateway.compiled
        peer = request.client.host if request.client is not None else None
        key = await authenticate_client(compiled, request.headers, peer, gateway.clients, gateway.keys)
        return (key.tenant if key is not None else compiled.policy.auth.anonymous_tenant), key

    async def answer(
        request: Request[Any, Any, Any], work: Any, *, is_content: bool = False
    ) -> Response[bytes]:
        """Authenticate, then ``work(tenant, key)``'s document (``is_content``: a file's bytes); any
        failure in OpenAI's shape."""
        try:
            tenant, key = await caller(request)
            done = await work(tenant, key)
            return Response(content=done, media_type="application/jsonl") if is_content else _json(done)
        except GatewayError as error:
            return _render(error)
        except (OSError, TimeoutError, RespError):  # Redis down or slow, the files directory unwritable
            return _render(
                ServiceUnavailable(
                    "Batch store unavailable.", code="store_unavailable", headers={"Retry-After": "1"}
                )
            )

    # one handler per path, whatever its methods: Litestar's Allow header then names them all
    @route("/v1/files", http_method=["GET", "POST"], status_code=200, request_max_body_size=max_upload_bytes)
    async def files(request: Request[Any, Any, Any]) -> Response[bytes]:
        return await (list_files(request) if request.method == "GET" else upload_file(request))

    @route("/v1/files/{file_id:str}", http_method=["GET", "DELETE"], status_code=200)
    async def one_file(request: Request[Any, Any, Any], file_id: str) -> Response[bytes]:
        if request.method == "GET":
            return await answer(request, lambda tenant, key: service.files.get(tenant, file_id))
        return await delete_file(request, file_id)

    @route("/v1/batches", http_method=["GET", "POST"], status_code=200)
    async def batches(request: Request[Any, Any, Any]) -> Response[bytes]:
        return await (list_batches(request) if request.method == "GET" else create_batch(request))

    async def upload_file(request: Request[Any, Any, Any]) -> Response[bytes]:
        async def work(tenant: str, key: ApiKey | None) -> Any:
            try:
                form = await request.form()
            except RequestEntityTooLarge:  # past the route's bound: Litestar stops reading there
                raise BodyTooLarge(f"The file is over the limit of {max_file_bytes} bytes.") from None
            except Exception:  # Litestar's multipart parser: a malformed body
                raise InvalidRequest(
                    "Expected a multipart/form-data body with 'file' and 'purpose'."
                ) from None
            upload, purpose = form.get("file"), form.get("purpose")
            if not isinstance(upload, UploadFile):
                raise InvalidRequest("Missing required parameter: 'file'.", param="file")
            if not isinstance(purpose, str):
                raise InvalidRequest("Missing required parameter: 'purpose'.", param="purpose")
            data = await upload.read()
            config = gateway.policy.batches
            return await service.upload(tenant, upload.filename or "upload.jsonl", purpose, data, config)

        return await answer(request, work)

    async def list_files(request: Request[Any, Any, Any]) -> Response[bytes]:
        async def work(tenant: str, key: ApiKey | None) -> Any:
            query = dict(request.query_params)
            if query.get("order", "desc") not in ("asc", "desc"):
                raise InvalidRequest("order: expected 'asc' or 'desc'.", param="order")
            files = await service.files.list_files(tenant, query.get("purpose"))
            if query.get("order") == "asc":
                files = files[::-1]
            return page(files, query, lambda file: file.id, default_limit=10_000)

        return await answer(request, work)

    @get("/v1/files/{file_id:str}/content")
    async def file_content(request: Request[Any, Any, Any], file_id: str) -> Response[bytes]:
        return await answer(
            request, lambda tenant, key: service.files.content(tenant, file_id), is_content=True
        )

    async def delete_file(request: Request[Any, Any, Any], file_id: str) -> Response[bytes]:
        async def work(tenant: str, key: ApiKey | None) -> Any:
            await service.files.delete(tenant, file_id)
            return {"id": file_id, "object": "file", "deleted": True}

        return await answer(request, work)

    async def create_batch(request: Request[Any, Any, Any]) -> Response[bytes]:
        async def work(tenant: str, key: ApiKey | None) -> Any:
            try:
                body = msgspec.json.decode(await request.body())
            except msgspec.DecodeError as error:
                raise InvalidJSON(f"We could not parse the JSON body of your request ({error}).") from None
            if not isinstance(body, dict):
                raise InvalidRequest("The request body must be a JSON object.", code="invalid_type")
            config = gateway.policy.batches
            batch = await service.create(tenant, key.sha256 if key is not None else None, body, config)
            wake()
            return batch.to_object()

        return await answer(request, work)

    async def list_batches(request: Request[Any, Any, Any]) -> Response[bytes]:
        async def work(tenant: str, key: ApiKey | None) -> Any:
            batches = [batch.to_object() for batch in await service.list_batches(tenant)]
            return page(batches, dict(request.query_params), lambda batch: batch.id, default_limit=20)

        return await answer(request, work)

    @get("/v1/batches/{batch_id:str}")
    async def retrieve_batch(request: Request[Any, Any, Any], batch_id: str) -> Response[bytes]:
        async def work(tenant: str, key: ApiKey | None) -> Any:
            return (await service.get(tenant, batch_id)).to_object()

        return await answer(request, work)

    @post("/v1/batches/{batch_id:str}/cancel", status_code=200)
    async def cancel_batch(request: Request[Any, Any, Any], batch_id: str) -> Response[bytes]:
        async def work(tenant: str, key: ApiKey | None) -> Any:
            batch = await service.cancel(tenant, batch_id)
            wake()
            return batch.to_object()

        return await answer(request, work)

    return [files, one_file, file_content, batches, retrieve_batch, cancel_batch]
