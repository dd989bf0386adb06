# Added by the tests, not part of the seed: "Four ways in" runs the `code` of the samples above
# it on the page.
code = """
def run(input, config):
    return sum(input)
"""
