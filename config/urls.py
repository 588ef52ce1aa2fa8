"""URL configuration: everything is served by the project's one NinjaAPI."""

from django.urls import path

from config.api import api
from imagegen.api.a1111 import router as a1111_router
from imagegen.api.native import router as imagegen_router
from imagegen.api.openai import router as openai_router
from todos.api import router as todos_router

api.add_router("", todos_router)
api.add_router("", imagegen_router)
api.add_router("/v1", openai_router)
api.add_router("/sdapi/v1", a1111_router)

urlpatterns = [path("", api.urls)]
