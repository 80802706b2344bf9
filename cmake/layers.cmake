# The layers' direction, checked: for each layer a probe source that includes a header of a
# layer it must not see (one above it, or beside it: ops and rendezvous stand side by side on
# common), built against that layer's library alone. tests/tools/layers_test.sh builds each
# probe and expects the include to fail; the probes are not part of `all`.
set(_probe_dir ${PROJECT_BINARY_DIR}/layer_probes)
set(_n 0)
foreach(_probe "cerar_common|ops/transport/transport.h" "cerar_common|rendezvous/tcp_store.h"
               "cerar_ops|rendezvous/tcp_store.h" "cerar_ops|core/runtime.h"
               "cerar_rendezvous|ops/transport/transport.h" "cerar_rendezvous|core/runtime.h"
               "cerar|bindings/tensors.h")
  string(REPLACE "|" ";" _probe "${_probe}")
  list(GET _probe 0 _layer)
  list(GET _probe 1 _header)
  math(EXPR _n "${_n} + 1")
  file(WRITE ${_probe_dir}/${_layer}_probe_${_n}.cc "#include \"${_header}\"\n")
  add_library(${_layer}_probe_${_n} OBJECT EXCLUDE_FROM_ALL ${_probe_dir}/${_layer}_probe_${_n}.cc)
  target_link_libraries(${_layer}_probe_${_n} PRIVATE ${_layer})
  list(APPEND CERAR_LAYER_PROBES "${_layer}_probe_${_n}:${_header}")
endforeach()
add_test(NAME layers_point_down
  COMMAND ${PROJECT_SOURCE_DIR}/tests/tools/layers_test.sh ${PROJECT_BINARY_DIR}
    ${CERAR_LAYER_PROBES})
