# Compiler flags of the sanitizer build (OOBLECK_SANITIZE) and the fuzz build
# (OOBLECK_FUZZ). Included from the top-level CMakeLists.txt before any target,
# so that the libraries the tests and fuzz targets link are instrumented too.
if(OOBLECK_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "OOBLECK_FUZZ needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
  set(OOBLECK_SANITIZE ON)
  # Coverage feedback for libFuzzer in every library; the fuzz targets alone
  # link libFuzzer's main (fuzz/CMakeLists.txt).
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()

if(OOBLECK_SANITIZE)
  message(STATUS "oobleck: AddressSanitizer and UndefinedBehaviorSanitizer on")
  # Undefined behaviour stops the program, so a test or a fuzz target fails
  # on it instead of printing a line nobody reads.
  set(oobleck_sanitizer_flags -fsanitize=address,undefined -fno-sanitize-recover=undefined)
  add_compile_options(${oobleck_sanitizer_flags} -fno-omit-frame-pointer)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC's flow analysis sees the sanitizers' checks as paths where values
    # stay unset (in <regex>, <functional>): false alarms only in this build.
    add_compile_options(-Wno-maybe-uninitialized)
  endif()
  add_link_options(${oobleck_sanitizer_flags})
endif()
