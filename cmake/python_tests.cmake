# The pytest suite as ctest entries, one per module (tests/python/test_<module>.py), run against
# the package installed in .venv; a module exits 77 (skipped) where there is no .venv.
set(CERAR_PYTHON "${PROJECT_SOURCE_DIR}/.venv/bin/python" CACHE FILEPATH
    "Interpreter with the cerar package installed, for the pytest suite")
file(GLOB _cerar_py_tests CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/python/test_*.py)
foreach(_path IN LISTS _cerar_py_tests)
  get_filename_component(_module ${_path} NAME_WE)
  add_test(NAME python.${_module}
    COMMAND sh -c "test -x '${CERAR_PYTHON}' || exit 77; exec '${CERAR_PYTHON}' -m pytest -q -rs -p no:cacheprovider tests/python/${_module}.py"
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  # Each job's own subprocess timeout catches a hang first.
  set_tests_properties(python.${_module} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 900
    LABELS python)
endforeach()
# The modules that make network namespaces (emulated hosts) take them one at a time, as the
# bench's namespace test does.
foreach(_module test_multihost test_ray test_elastic test_elastic_faults)
  if(TEST python.${_module})
    set_tests_properties(python.${_module} PROPERTIES RESOURCE_LOCK netns)
  endif()
endforeach()
# The longest modules first (seconds measured in CI), so that two at a time end together: ctest
# starts tests by cost, and a fresh build folder has no costs of its own yet.
foreach(_cost "test_elastic|180" "test_elastic_faults|150" "test_ray|70" "test_dist_backend|40" "test_ddp|37" "test_multihost|37"
              "test_scatter_join|28" "test_torch|27" "test_errors|27" "test_docs_blocks|60")
  string(REPLACE "|" ";" _cost "${_cost}")
  list(GET _cost 0 _module)
  list(GET _cost 1 _seconds)
  if(TEST python.${_module})
    set_tests_properties(python.${_module} PROPERTIES COST ${_seconds})
  endif()
endforeach()
