from django.apps import AppConfig


class TodosConfig(AppConfig):
    name = "todos"

    def ready(self) -> None:
        from todos.connection import connect_database

        connect_database()
