"""The page's addresses: /ui/ and /ui. Browsers ask for /favicon.ico by that name."""

from django.templatetags.static import static
from django.urls import path
from django.views.generic import RedirectView

from imagegen.ui import views

urlpatterns = [
    path("ui/", views.page, name="ui"),
    path("ui", RedirectView.as_view(url="/ui/", permanent=False)),
    path("favicon.ico", RedirectView.as_view(url=static("ui/favicon.svg"), permanent=False)),
]
