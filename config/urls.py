"""URL configuration: the page at /ui/, and the project's one NinjaAPI for everything else."""

from django.urls import include, path

from config.api import api
from imagegen.api.a1111 import router as a1111_router
from imagegen.api.mcp import router as mcp_router
from imagegen.api.metrics import router as metrics_router
from imagegen.api.native import router as imagegen_router
from imagegen.api.openai import router as openai_router
from todos.api import router as todos_router

api.add_router("", todos_router)
api.add_router("", imagegen_router)
api.add_router("", metrics_router)
api.add_router("/v1", openai_router)
api.add_router("/sdapi/v1", a1111_router)
api.add_router("", mcp_router)

# The page for people (/ui/) is a Django view of its own; everything else is the API.
urlpatterns = [path("", include("imagegen.ui.urls")), path("", api.urls)]
