// The CPU test suite's entry point (doctest). Every case here runs on any machine.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
