// A benchmark's main: its body run with any escaping exception turned into one line on stderr
// and exit code 1 (an uncaught one aborts the process with "terminate called after throwing").
#pragma once

#include <cstdio>
#include <exception>

namespace bench {

inline int guarded_main(const char* name, int argc, char** argv, int (*body)(int, char**)) {
  try {
    return body(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace bench
