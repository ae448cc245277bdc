"""pb_utils.ModelConfig, the object `auto_complete_config` receives and returns.

Built from the model configuration as JSON text (the server's JSON form of
Triton's ModelConfig). The setters change only what Triton lets
auto-complete change, with Triton's validation and error messages (they
raise ValueError, as Triton's do).
"""

import json


_TENSOR_PROPERTIES = {
    "input": ("name", "data_type", "dims", "optional"),
    "output": ("name", "data_type", "dims"),
}


def _quoted_list(names):
    quoted = [f"'{name}'" for name in names]
    return ", ".join(quoted[:-1]) + " and " + quoted[-1]


class ModelConfig:
    """`ModelConfig(model_config_json)`; `as_dict()`, `set_max_batch_size()`,
    `set_dynamic_batching()`, `add_input()`, `add_output()`,
    `set_model_transaction_policy()`."""

    def __init__(self, model_config):
        self._model_config = json.loads(model_config)

    @property
    def _name(self):
        return str(self._model_config.get("name", ""))

    def as_dict(self):
        """The configuration as a dict (read it; change it with the setters)."""
        return self._model_config

    def set_max_batch_size(self, max_batch_size):
        """Set max_batch_size. Raises ValueError if the configuration already
        asks for a larger one."""
        configured = self._model_config.get("max_batch_size", 0)
        if configured > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {configured}, but in "
                f"auto-complete-config function for model '{self._name}' specified "
                f"max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self):
        """Choose the dynamic batcher unless a scheduler is set: no-op when
        dynamic_batching is already there, ValueError for sequence or
        ensemble scheduling."""
        for scheduler in ("sequence_batching", "ensemble_scheduling"):
            if scheduler in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{scheduler}', but "
                    f"auto-complete-config function for model '{self._name}' tries to "
                    "set scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input):
        """Add an input {'name', 'data_type', 'dims'[, 'optional']}, or fill
        in the one of that name; ValueError on a conflicting definition."""
        self._add_tensor("input", input)

    def add_output(self, output):
        """Add an output {'name', 'data_type', 'dims'}, or fill in the one of
        that name; ValueError on a conflicting definition."""
        self._add_tensor("output", output)

    def _add_tensor(self, kind, tensor):
        allowed = _TENSOR_PROPERTIES[kind]
        label = f"{kind} '{tensor.get('name')}'"
        where = f"in auto-complete-config function for model '{self._name}'"
        for key in tensor:
            if key not in allowed:
                raise ValueError(f"{label} {where} contains property other than {_quoted_list(allowed)}.")
        if "name" not in tensor:
            raise ValueError(f"{kind} {where} is missing 'name' property.")
        for key in ("data_type", "dims"):
            if key not in tensor:
                raise ValueError(f"{label} {where} is missing '{key}' property.")
        name = tensor["name"]
        existing = self._model_config.setdefault(kind, [])
        for current in existing:
            if current.get("name") != name:
                continue
            current_type = current.get("data_type", "TYPE_INVALID")
            if current_type != "TYPE_INVALID" and current_type != tensor["data_type"]:
                raise ValueError(
                    f"unable to load model '{self._name}', configuration expects datatype "
                    f"{current_type} for {kind} '{name}', model provides {tensor['data_type']}"
                )
            if current.get("dims") and current["dims"] != tensor["dims"]:
                raise ValueError(
                    f"model '{self._name}', tensor '{name}': the model expects dims "
                    f"{tensor['dims']} but the model configuration specifies dims {current['dims']}"
                )
            if "optional" in current and "optional" in tensor and current["optional"] != tensor["optional"]:
                raise ValueError(
                    f"model '{self._name}', tensor '{name}': the model expects optional "
                    f"{tensor['optional']} but the model configuration specifies optional "
                    f"{current['optional']}"
                )
            current["data_type"] = tensor["data_type"]
            current["dims"] = tensor["dims"]
            if "optional" in tensor:
                current["optional"] = tensor["optional"]
            return
        existing.append(tensor)

    def set_model_transaction_policy(self, transaction_policy_dict):
        """Set model_transaction_policy ({'decoupled': bool}); ValueError for
        other keys or for changing an already configured `decoupled`."""
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(
                    "model transaction property in auto-complete-config function for model "
                    f"'{self._name}' contains property other than 'decoupled'."
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != wanted:
                raise ValueError(
                    "trying to change decoupled property in auto-complete-config for model "
                    f"'{self._name}', which is already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = wanted
