import os
from lbb import LbbClient

lbb = LbbClient(
    os.environ["ENDPOINT_URL"],
    api_key=os.environ["API_KEY"],
    graph="main",
)
result = lbb.sandboxes.run(code=code, input=[1, 2, 3]).result
