from django.apps import AppConfig


class UiConfig(AppConfig):
    name = "imagegen.ui"
    label = "imagegen_ui"
