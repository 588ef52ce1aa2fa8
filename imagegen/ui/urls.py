"""The page's addresses: /ui/ (and /ui, which leads there), and /favicon.ico, which browsers
and tools ask for by that name, leading to the page's icon."""

from django.templatetags.static import static
from django.urls import path
from django.views.generic import RedirectView

from imagegen.ui import views

urlpatterns = [
    path("ui/", views.page, name="ui"),
    path("ui", RedirectView.as_view(url="/ui/", permanent=False)),
    path("favicon.ico", RedirectView.as_view(url=static("ui/favicon.svg"), permanent=False)),
]
