# The layers' direction, checked: for each layer a probe source that includes a header of the
# layer above it, built against that layer's library alone. tests/tools/layers_test.sh builds
# each probe and expects the include to fail; the probes are not part of `all`.
set(_probe_dir ${PROJECT_BINARY_DIR}/layer_probes)
foreach(_probe "cerar_ops|core/rendezvous/tcp_store.h" "cerar_rendezvous|core/runtime.h"
               "cerar|bindings/tensors.h")
  string(REPLACE "|" ";" _probe "${_probe}")
  list(GET _probe 0 _layer)
  list(GET _probe 1 _header)
  file(WRITE ${_probe_dir}/${_layer}_up.cc "#include \"${_header}\"\n")
  add_library(${_layer}_probe_up OBJECT EXCLUDE_FROM_ALL ${_probe_dir}/${_layer}_up.cc)
  target_link_libraries(${_layer}_probe_up PRIVATE ${_layer})
  list(APPEND CERAR_LAYER_PROBES "${_layer}_probe_up:${_header}")
endforeach()
add_test(NAME layers_point_down
  COMMAND ${PROJECT_SOURCE_DIR}/tests/tools/layers_test.sh ${PROJECT_BINARY_DIR}
    ${CERAR_LAYER_PROBES})
