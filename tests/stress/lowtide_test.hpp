// The shared test helpers live one directory up.
#pragma once
#include "../lowtide_test.hpp"
