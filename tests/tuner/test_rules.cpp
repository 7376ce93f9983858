// placeholder: filled in by the tuner work (issue 9)
#include <catch2/catch.hpp>
