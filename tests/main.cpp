// Catch2's main, compiled once for every test file.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
