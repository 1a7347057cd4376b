// The one translation unit that holds Catch2's main (compiling it is slow; do it once).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
