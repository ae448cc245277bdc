// The few libtorch calls `tch` does not expose, behind a C interface that
// `src/ffi.rs` wraps: a TorchScript module handle with forward()'s schema,
// a forward call under Triton's per-execution settings (InferenceMode, the
// graph executor switches), byte-exact `List[str]` inputs and outputs, and
// on-demand loading of libtorch's CUDA half.
//
// Every function catches C++ exceptions and reports them as a malloc'd
// message (freed by ntm_free_string); none lets one cross into Rust.
// Tensors cross as `torch::Tensor*`, the same representation `tch` uses,
// so Rust creates and reads them with `tch`.

#include <dlfcn.h>

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

char* copy_string(const std::string& text) {
  char* out = static_cast<char*>(std::malloc(text.size() + 1));
  if (out != nullptr) {
    std::memcpy(out, text.c_str(), text.size() + 1);
  }
  return out;
}

// libtorch's c10::Error::what() appends a C++ backtrace that helps nobody
// reading a model's load error; keep the message.
char* error_of(const std::exception& e) {
  if (auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    return copy_string(c10_error->what_without_backtrace());
  }
  return copy_string(e.what());
}

// Argument kinds, as ffi.rs reads them.
enum ArgKind : int { ARG_TENSOR = 0, ARG_STRING_LIST = 1, ARG_DICT = 2, ARG_OTHER = 3 };

// Output kinds, as ffi.rs reads them.
enum OutputKind : int { OUT_TENSOR = 0, OUT_STRING_LIST = 1 };

int arg_kind(const c10::TypePtr& type) {
  switch (type->kind()) {
    case c10::TypeKind::TensorType:
      return ARG_TENSOR;
    case c10::TypeKind::DictType:
      return ARG_DICT;
    case c10::TypeKind::ListType:
      if (type->containedType(0)->kind() == c10::TypeKind::StringType) {
        return ARG_STRING_LIST;
      }
      return ARG_OTHER;
    default:
      return ARG_OTHER;
  }
}

bool is_string_list(const c10::IValue& value) {
  return value.isList() && value.toList().elementType()->kind() == c10::TypeKind::StringType;
}

}  // namespace

struct ntm_module {
  std::shared_ptr<torch::jit::Module> module;
  std::vector<std::string> arg_names;
  std::vector<std::string> arg_types;
  std::vector<int> arg_kinds;
};

struct ntm_outputs {
  std::vector<c10::IValue> values;
};

// One forward() argument: a tensor, or the elements of a List[str].
struct ntm_arg {
  const char* name;
  void* tensor;
  const char* const* strings;
  const size_t* string_lens;
  size_t string_count;
};

struct ntm_exec_options {
  bool optimized_execution;
  bool inference_mode;
  // -1 leaves libtorch's process-wide setting alone, 0 or 1 sets it.
  int jit_profiling;
  int jit_executor;
  bool dict_input;
};

extern "C" {

void ntm_free_string(char* s) { std::free(s); }

// Makes CUDA usable when it is not yet: the binary links libtorch_cpu only
// (the linker drops libtorch_cuda, nothing naming its symbols), so its CUDA
// hooks register when it is loaded here. Returns an error when CUDA cannot
// be used, with the loader's or libtorch's reason.
char* ntm_cuda_ready(int device_index) {
  try {
    if (!torch::cuda::is_available()) {
      if (dlopen("libtorch_cuda.so", RTLD_NOW | RTLD_GLOBAL) == nullptr) {
        const char* reason = dlerror();
        return copy_string(std::string("libtorch's CUDA library cannot be loaded: ") +
                           (reason != nullptr ? reason : "unknown reason"));
      }
    }
    if (!torch::cuda::is_available()) {
      return copy_string("libtorch finds no CUDA device on this machine");
    }
    auto count = torch::cuda::device_count();
    if (device_index < 0 || static_cast<size_t>(device_index) >= count) {
      return copy_string("CUDA device " + std::to_string(device_index) + " does not exist (" +
                         std::to_string(count) + " visible)");
    }
    return nullptr;
  } catch (const std::exception& e) {
    return error_of(e);
  }
}

// Loads a TorchScript file onto the CPU (device_index -1), a CUDA device
// (0 and up) or where its tensors were saved (-2), and reads forward()'s
// arguments, without `self`.
char* ntm_load(const char* path, int device_index, bool inference_mode, ntm_module** out) {
  try {
    c10::InferenceMode guard(inference_mode);
    auto handle = std::make_unique<ntm_module>();
    if (device_index == -2) {
      handle->module = std::make_shared<torch::jit::Module>(torch::jit::load(path));
    } else {
      torch::Device device = device_index < 0
                                 ? torch::Device(torch::kCPU)
                                 : torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(device_index));
      handle->module = std::make_shared<torch::jit::Module>(torch::jit::load(path, device));
    }
    const auto& arguments = handle->module->get_method("forward").function().getSchema().arguments();
    size_t start = 0;
    if (!arguments.empty() && arguments[0].type()->kind() == c10::TypeKind::ClassType) {
      start = 1;
    }
    for (size_t i = start; i < arguments.size(); ++i) {
      handle->arg_names.push_back(arguments[i].name());
      handle->arg_types.push_back(arguments[i].type()->str());
      handle->arg_kinds.push_back(arg_kind(arguments[i].type()));
    }
    *out = handle.release();
    return nullptr;
  } catch (const std::exception& e) {
    return error_of(e);
  }
}

void ntm_free(ntm_module* module) { delete module; }

size_t ntm_arg_count(const ntm_module* module) { return module->arg_names.size(); }

const char* ntm_arg_name(const ntm_module* module, size_t i) { return module->arg_names[i].c_str(); }

const char* ntm_arg_type(const ntm_module* module, size_t i) { return module->arg_types[i].c_str(); }

int ntm_arg_kind(const ntm_module* module, size_t i) { return module->arg_kinds[i]; }

// Sets libtorch's process-wide thread pools. The inter-op pool can only be
// sized before its first use; libtorch's refusal comes back as the error.
char* ntm_set_threads(int intra_op, int inter_op) {
  try {
    if (intra_op > 0) {
      at::set_num_threads(intra_op);
    }
    if (inter_op > 0) {
      at::set_num_interop_threads(inter_op);
    }
    return nullptr;
  } catch (const std::exception& e) {
    return error_of(e);
  }
}

// Runs forward() and keeps its outputs as Triton's PyTorch backend reads
// them: a tensor, a List[str], or a tuple of those, in order; and, beyond
// Triton, a List[Tensor] as if it were a tuple.
char* ntm_forward(const ntm_module* module, const ntm_arg* args, size_t arg_count,
                  const ntm_exec_options* options, ntm_outputs** out) {
  try {
    torch::jit::setGraphExecutorOptimize(options->optimized_execution);
    c10::InferenceMode guard(options->inference_mode);
    if (options->jit_profiling >= 0) {
      torch::jit::getProfilingMode() = options->jit_profiling == 1;
    }
    if (options->jit_executor >= 0) {
      torch::jit::getExecutorMode() = options->jit_executor == 1;
    }
    torch::NoGradGuard no_grad;

    std::vector<c10::IValue> inputs;
    if (options->dict_input) {
      c10::Dict<std::string, at::Tensor> dict;
      for (size_t i = 0; i < arg_count; ++i) {
        dict.insert(args[i].name, *static_cast<at::Tensor*>(args[i].tensor));
      }
      inputs.emplace_back(dict);
    } else {
      for (size_t i = 0; i < arg_count; ++i) {
        if (args[i].tensor != nullptr) {
          inputs.emplace_back(*static_cast<at::Tensor*>(args[i].tensor));
        } else {
          c10::List<std::string> list;
          list.reserve(args[i].string_count);
          for (size_t s = 0; s < args[i].string_count; ++s) {
            list.push_back(std::string(args[i].strings[s], args[i].string_lens[s]));
          }
          inputs.emplace_back(list);
        }
      }
    }

    c10::IValue result = module->module->forward(inputs);
    auto outputs = std::make_unique<ntm_outputs>();
    if (result.isTuple()) {
      size_t index = 0;
      for (const auto& element : result.toTuple()->elements()) {
        if (!element.isTensor() && !is_string_list(element)) {
          return copy_string("output at index " + std::to_string(index) +
                             " must be of type Tensor or List[str], received " +
                             element.type()->str());
        }
        outputs->values.push_back(element);
        ++index;
      }
    } else if (result.isTensor() || is_string_list(result)) {
      outputs->values.push_back(result);
    } else if (result.isTensorList()) {
      // Triton refuses List[Tensor]; Nereid reads it as it reads a tuple.
      for (const auto& tensor : result.toTensorVector()) {
        outputs->values.emplace_back(tensor);
      }
    } else {
      return copy_string(
          "output must be of type Tensor, List[str] or Tuple containing one of these two types, "
          "received " +
          result.type()->str());
    }
    *out = outputs.release();
    return nullptr;
  } catch (const std::exception& e) {
    return error_of(e);
  }
}

void ntm_outputs_free(ntm_outputs* outputs) { delete outputs; }

size_t ntm_outputs_count(const ntm_outputs* outputs) { return outputs->values.size(); }

int ntm_output_kind(const ntm_outputs* outputs, size_t i) {
  return outputs->values[i].isTensor() ? OUT_TENSOR : OUT_STRING_LIST;
}

// The output as a new contiguous CPU tensor, for `tch` to own and read.
char* ntm_output_tensor(const ntm_outputs* outputs, size_t i, void** out) {
  try {
    at::Tensor tensor = outputs->values[i].toTensor().to(torch::kCPU).contiguous();
    *out = new at::Tensor(std::move(tensor));
    return nullptr;
  } catch (const std::exception& e) {
    return error_of(e);
  }
}

size_t ntm_output_string_count(const ntm_outputs* outputs, size_t i) {
  return outputs->values[i].toListRef().size();
}

// The bytes of element `j` of string-list output `i`, borrowed from `outputs`.
void ntm_output_string(const ntm_outputs* outputs, size_t i, size_t j, const char** data,
                       size_t* len) {
  const std::string& s = outputs->values[i].toListRef()[j].toStringRef();
  *data = s.data();
  *len = s.size();
}

}  // extern "C"
