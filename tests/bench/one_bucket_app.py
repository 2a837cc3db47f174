"""The trivial baseline for `make bench`: one bucket, no nag, through the same CLI."""

import aws_cdk as cdk
from aws_cdk import aws_s3 as s3

app = cdk.App()
stack = cdk.Stack(app, "OneBucket", env=cdk.Environment(account="111111111111", region="us-east-1"))
s3.Bucket(stack, "Bucket")
app.synth()
