"""The page's addresses: /ui/ (and /ui, which leads there)."""

from django.urls import path
from django.views.generic import RedirectView

from imagegen.ui import views

urlpatterns = [
    path("ui/", views.page, name="ui"),
    path("ui", RedirectView.as_view(url="/ui/", permanent=False)),
]
