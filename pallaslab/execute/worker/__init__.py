"""Running safely: the killable worker process (`main`, started by `isolation`, asked through
`worker_request`), time limits and Ctrl-C (`monitor`: the program running, prints, progress),
and the compiles a run makes (`running`, `compile_cache`)."""
