# In your product, a model writes this code.
code = """
def run(input, config):
    return sum(input)
"""

result = lbb.sandboxes.run(code=code, input=[1, 2, 3]).result
# result is 6
