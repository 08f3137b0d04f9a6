// Catch2 v2 entry point for the whole fa3jit test suite.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
