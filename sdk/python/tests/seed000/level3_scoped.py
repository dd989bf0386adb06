csv = "1,2\n3,4\n"
count_lines = """
def run(input, config):
    return len(open(input["file"]).read().splitlines())
"""
upper_py = """
print(open("data.csv").read().upper())
"""

with lbb.sandboxes.scoped() as sb:
    sb.files.write("data.csv", csv)
    sb.files.write("upper.py", upper_py)
    rows = sb.run(code=count_lines, input={"file": "data.csv"})
    upper = sb.commands.create(argv=["python", "upper.py"], wait_ms=30_000)
    out = {"lines": rows["result"], "upper": upper["stdout"]["tail"]}
