// The archive calls of nn::Module and optim::Optimizer (libtorch's `module->save(archive)`),
// defined here in io: their headers name the archive classes without including io.
#include <string>

#include "tandem/io/serialize.hpp"

namespace tandem {

namespace nn {
void Module::save(serialize::OutputArchive& archive) const { archive.write(state_dict()); }

void Module::load(serialize::InputArchive& archive) {
  StateDict state;
  std::string missing;
  for (const auto& [name, tensor] : state_dict()) {
    Tensor stored;
    if (archive.try_read(name, stored))
      state.emplace(name, stored);
    else
      missing += (missing.empty() ? "" : ", ") + name;
  }
  TANDEM_CHECK_T(io::IoError, missing.empty(), type_name_, ": load: the archive holds no ",
                 missing);
  load_state_dict(state);
}
}  // namespace nn

namespace optim {
void Optimizer::save(serialize::OutputArchive& archive) const { archive.write(state_dict()); }

void Optimizer::load(serialize::InputArchive& archive) { load_state_dict(archive.tensors()); }
}  // namespace optim

}  // namespace tandem
