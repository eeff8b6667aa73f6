# Finds CUDA and NCCL when they are present and says so; nothing requires them.
# NCCL ships no CMake config, so its header and library are looked up by hand.
find_package(CUDAToolkit QUIET)
set(_nccl_hints $ENV{NCCL_HOME} /usr/local/cuda ${CUDAToolkit_LIBRARY_ROOT})
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${_nccl_hints} PATH_SUFFIXES lib lib64)
if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY AND NOT TARGET oobleck::nccl)
  add_library(oobleck::nccl UNKNOWN IMPORTED)
  set_target_properties(oobleck::nccl PROPERTIES
    IMPORTED_LOCATION ${NCCL_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
endif()
if(CUDAToolkit_FOUND)
  message(STATUS "oobleck: CUDA ${CUDAToolkit_VERSION} found")
else()
  message(STATUS "oobleck: CUDA not found (optional)")
endif()
if(TARGET oobleck::nccl)
  message(STATUS "oobleck: NCCL found at ${NCCL_LIBRARY}")
else()
  message(STATUS "oobleck: NCCL not found (optional)")
endif()
