"""The /mcp route: the Model Context Protocol over streamable HTTP (its tools in
imagegen/api/mcp_tools.py).

The MCP SDK and its tools are imported on the first call, not with the routes: they are about
a third of what a web process imports before its first answer, and most processes never serve
an MCP call.
"""

from django.http import HttpRequest, HttpResponseNotAllowed
from ninja import Router

from apikeys.auth import token_required

PATH = "/mcp"

router = Router(tags=["mcp"])


@router.api_operation(
    ["GET", "POST", "DELETE"],
    PATH,
    auth=token_required(),
    include_in_schema=False,
    summary="The Model Context Protocol (streamable HTTP): an agent's image tools",
)
def mcp(request: HttpRequest):
    """POST only: stateless, the server never sends on a GET stream, which would only hold a
    worker thread for ever (the transport lets a server refuse it with 405; clients then go
    on without one), and has no session to DELETE."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    from imagegen.api.mcp_tools import bridge  # on first use: the module's docstring

    return bridge(PATH).answer(request)
