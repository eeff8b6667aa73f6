// The translation unit that makes libtorch's precompiled header (CMakeLists.txt:
// oobleck_torch_header); it compiles nothing of its own.
