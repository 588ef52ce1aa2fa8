from django.apps import AppConfig


class TodosConfig(AppConfig):
    name = "todos"

    def ready(self) -> None:
        from todos.connection import connect_database
        from todos.errors import register_error_shapes

        register_error_shapes()
        connect_database()
