"""A model whose import fails: the worker must report the import error."""

import nereid_module_that_does_not_exist  # noqa: F401


class TritonPythonModel:
    def execute(self, requests):
        return []
