lbb.sandboxes.templates.create(
    name="normalize",
    base="lbb/python",
    code=code,
    limits={"memory_mib": 2048},
    timeout_ms=60_000,
    config={"unit": "cm"},
)

lbb.sandboxes.run(template="normalize", input=[1, 2, 3])
