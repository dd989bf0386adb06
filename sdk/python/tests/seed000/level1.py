code = """
def run(input, config):
    return sum(input)
"""

run = lbb.sandboxes.run(code=code, input=[1, 2, 3])
run.ok        # True when the code exited with code 0
run.result    # 6
run.command   # "cmd_…", the record of this run
