"""URL configuration: the page at /ui/, and the project's one NinjaAPI for everything else."""

from django.urls import include, path

from config.api import api
from imagegen.api.a1111 import router as a1111_router
from imagegen.api.a1111_extras import router as a1111_extras_router
from imagegen.api.errors import EXCEPTION_HANDLERS as IMAGEGEN_HANDLERS
from imagegen.api.mcp import router as mcp_router
from imagegen.api.metrics import router as metrics_router
from imagegen.api.native import router as imagegen_router
from imagegen.api.openai import router as openai_router
from todos.api import router as todos_router
from todos.api import version_router as todos_version_router
from todos.errors import EXCEPTION_HANDLERS as TODOS_HANDLERS

api.add_router("", todos_version_router)
api.add_router("", todos_router)
api.add_router("", imagegen_router)
api.add_router("", metrics_router)
api.add_router("/v1", openai_router)
api.add_router("/sdapi/v1", a1111_router)
api.add_router("/sdapi/v1", a1111_extras_router)
api.add_router("", mcp_router)
for handlers in (TODOS_HANDLERS, IMAGEGEN_HANDLERS):
    for exception, handler in handlers.items():
        api.add_exception_handler(exception, handler)

# The page for people (/ui/) is a Django view of its own; everything else is the API.
urlpatterns = [path("", include("imagegen.ui.urls")), path("", api.urls)]
