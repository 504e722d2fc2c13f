// The default generator.
#include "tandem/core/generator.hpp"

namespace tandem {

Generator& default_generator() {
  static Generator gen;
  return gen;
}

}  // namespace tandem
