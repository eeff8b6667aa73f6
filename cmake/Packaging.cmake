# `cmake --install` and `cpack -G DEB`: the programs, the static libraries
# they are made of, their public headers and a CMake package, so that another
# project can find_package(oobleck) and link oobleck::planner or oobleck::sim
# (README.md, "Using oobleck from another project").
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# ------------------------------------------------------------------ programs

set(oobleck_programs oobleck-plan oobleck-sim)
if(TARGET oobleck-run)
  list(APPEND oobleck_programs oobleck-profile oobleck-run oobleck-agent)  # (the agent beside oobleck-run)
endif()
# Libraries linked from outside the system's folders (CUDA under /usr/local,
# a pip PyTorch) stay findable from the installed programs.
set_target_properties(${oobleck_programs} PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
install(TARGETS ${oobleck_programs} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# oobleck-plan and oobleck-sim read profiles; the bundled ones come along.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/profiles/ DESTINATION ${CMAKE_INSTALL_DATADIR}/oobleck/profiles)
# Exporting a model of one's own, and the PyTorch references it is checked against.
install(PROGRAMS ${PROJECT_SOURCE_DIR}/tools/export_model.py ${PROJECT_SOURCE_DIR}/tools/pytorch_own_model_reference.py
                 ${PROJECT_SOURCE_DIR}/tools/pytorch_gpt_reference.py ${PROJECT_SOURCE_DIR}/tools/torchrun_gpt_ddp.py
        DESTINATION ${CMAKE_INSTALL_DATADIR}/oobleck/tools)

# ------------------------------------------------------------------ libraries

# Everything the libraries link, in the order they depend on each other; the
# simulator links recovery privately and the validation the simulator, which
# static libraries still hand on to whoever links them.
set(oobleck_exported_parts common planner recovery sim model_config validation)
if(TARGET oobleck_executor)
  list(APPEND oobleck_exported_parts node_agent executor)
endif()
set(oobleck_exported_targets "")
foreach(part IN LISTS oobleck_exported_parts)
  set_target_properties(oobleck_${part} PROPERTIES EXPORT_NAME ${part})
  # The public headers are C++20: so must be whoever includes them.
  target_compile_features(oobleck_${part} PUBLIC cxx_std_20)
  list(APPEND oobleck_exported_targets oobleck_${part})
endforeach()
install(TARGETS ${oobleck_exported_targets} EXPORT oobleckTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

foreach(part IN ITEMS common planner recovery sim validation)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${part}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endforeach()
if(TARGET oobleck_executor)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/executor/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
else()
  # model_config's headers, plain C++; the rest of executor/include needs libtorch.
  install(FILES ${PROJECT_SOURCE_DIR}/executor/include/oobleck/executor/model_config.h
                ${PROJECT_SOURCE_DIR}/executor/include/oobleck/executor/analytic.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/oobleck/executor)
endif()

# ------------------------------------------------------------------ CMake package

set(oobleck_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/oobleck)
install(EXPORT oobleckTargets NAMESPACE oobleck:: DESTINATION ${oobleck_cmake_dir})

# What oobleckConfig.cmake.in fills in: the dependencies' minimum versions as
# the top-level CMakeLists.txt asks for them, and how the executor was built.
set(OOBLECK_NLOHMANN_JSON_MIN 3.10)
set(OOBLECK_EIGEN3_MIN 3.3)
set(OOBLECK_EXPORTED_PARTS "${oobleck_exported_parts}")
set(OOBLECK_WITH_EXECUTOR OFF)
set(OOBLECK_EXECUTOR_CUDA OFF)
set(OOBLECK_EXECUTOR_CUDA_ROOT "")
set(OOBLECK_EXECUTOR_NCCL "")
if(TARGET oobleck_executor)
  set(OOBLECK_WITH_EXECUTOR ON)
  if(CUDAToolkit_FOUND)
    set(OOBLECK_EXECUTOR_CUDA ON)
    cmake_path(GET CUDAToolkit_BIN_DIR PARENT_PATH OOBLECK_EXECUTOR_CUDA_ROOT)
    if(TARGET oobleck::nccl)
      set(OOBLECK_EXECUTOR_NCCL "${NCCL_LIBRARY}")
    endif()
  endif()
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/oobleckConfig.cmake.in
  ${PROJECT_BINARY_DIR}/oobleckConfig.cmake INSTALL_DESTINATION ${oobleck_cmake_dir})
# Before 1.0 a minor version may change the interface.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/oobleckConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/oobleckConfig.cmake ${PROJECT_BINARY_DIR}/oobleckConfigVersion.cmake
        DESTINATION ${oobleck_cmake_dir})

# ------------------------------------------------------------------ Debian package

set(CPACK_PACKAGE_NAME oobleck)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_DESCRIPTION "oobleck plans pipeline templates ahead for every node count, runs at least
f+1 heterogeneous pipeline replicas so that any f node failures are survived,
and re-instantiates pipelines from the templates when nodes are lost or come
back. This package holds oobleck-plan and oobleck-sim (oobleck-profile and
oobleck-run where built with libtorch), the bundled profiles, and the static
libraries, headers and CMake package for find_package(oobleck).")
set(CPACK_PACKAGE_CONTACT "oobleck developers")
set(CPACK_PACKAGE_INSTALL_DIRECTORY oobleck)
set(CPACK_GENERATOR DEB)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # oobleck_0.1.0_amd64.deb
set(CPACK_DEBIAN_PACKAGE_SECTION science)
# The programs' shared libraries (libstdc++6, libc6, libtorch's) come from
# dpkg-shlibdeps; what it cannot see is declared by hand.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(oobleck_deb_depends "")
set(oobleck_deb_recommends "nlohmann-json3-dev (>= 3.10), libeigen3-dev (>= 3.3), cmake (>= 3.25)")
if(TARGET oobleck_executor)
  # libtorch asks for any BLAS; its OpenMP threads and a pthreads OpenBLAS
  # would oversubscribe the cores, so the OpenMP build is the one tested.
  set(oobleck_deb_depends "libopenblas0-openmp")
  string(APPEND oobleck_deb_recommends ", libtorch-dev, libgloo-dev")
endif()
if(TARGET oobleck_python)
  # The module is built for one Python minor version (python/CMakeLists.txt).
  string(APPEND oobleck_deb_recommends ", python3 (>= ${OOBLECK_PYTHON_VERSION}), python3 (<< ${OOBLECK_PYTHON_NEXT_VERSION})")
endif()
set(CPACK_DEBIAN_PACKAGE_DEPENDS "${oobleck_deb_depends}")
# Only find_package(oobleck) needs these (the headers and CMake packages of
# what the libraries link), never the programs.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "${oobleck_deb_recommends}")
include(CPack)
